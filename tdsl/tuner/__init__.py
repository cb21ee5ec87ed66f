"""The autotuner, in AutoTVM's shape (docs/tuner.md).

    space.py     a template's knobs and constraints as a numbered configuration space
    task.py      one op at fixed sizes: template, space, flop count, inputs and reference
    features.py  fixed-length feature vectors of a configuration's loop program
    model.py     gradient-boosted trees that rank configurations (and ranking metrics)
    search.py    model-guided simulated annealing; random and grid baselines
    measure.py   parallel builds, isolated timed runs (workers.py: the worker processes)
    distributed.py  the same measurements on a dask.distributed cluster
    log.py       JSON-lines tuning logs: write, read, resume, pick the best
    transfer.py  earlier logs as training data for a new task's model
    tune.py      the loop that ties them together, its summary and progress line
"""

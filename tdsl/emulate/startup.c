/* startup.c - minimal Cortex-M startup for QEMU + newlib semihosting (librdimon).
 * Build with: -nostartfiles --specs=rdimon.specs -T <board>.ld
 * Works for M0/M3/M4/M7/M33/M55 (soft or hard float).                        */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __etext, __data_start__, __data_end__, __bss_start__, __bss_end__, __StackTop;
extern int main(void);
extern void initialise_monitor_handles(void);   /* librdimon: opens stdin/stdout/stderr */
extern void __libc_init_array(void);            /* newlib: runs constructors */

/* -nostartfiles drops crti.o/crtn.o; newlib's __libc_init_array/__libc_fini_array call these. */
void _init(void) {}
void _fini(void) {}

/* Semihosting SYS_EXIT_EXTENDED (0x20): QEMU exits with `code` as its own exit status. */
void semihost_exit(int code) {
    uint32_t block[2] = { 0x20026u /* ADP_Stopped_ApplicationExit */, (uint32_t)code };
    register uint32_t r0 __asm__("r0") = 0x20u;
    register uint32_t *r1 __asm__("r1") = block;
    __asm__ volatile ("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
    for (;;) {}
}

void Reset_Handler(void) {
#if defined(__ARM_FP)
    /* Hard/softfp float builds: enable the FPU (CP10/CP11 full access) first.   */
    *(volatile uint32_t *)0xE000ED88u |= (0xFu << 20);
    __asm__ volatile ("dsb\n\tisb" ::: "memory");
#endif
    uint32_t *src = &__etext, *dst = &__data_start__;
    while (dst < &__data_end__) *dst++ = *src++;                    /* .data: flash -> RAM */
    for (dst = &__bss_start__; dst < &__bss_end__; ) *dst++ = 0u;   /* zero .bss */
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());        /* newlib exit: flushes stdio, then SYS_EXIT(_EXTENDED) -> QEMU exit code */
}

/* Any fault or unexpected interrupt: leave QEMU with exit status 99. */
void Default_Handler(void) { semihost_exit(99); }

void NMI_Handler(void)        __attribute__((weak, alias("Default_Handler")));
void HardFault_Handler(void)  __attribute__((weak, alias("Default_Handler")));
void MemManage_Handler(void)  __attribute__((weak, alias("Default_Handler")));
void BusFault_Handler(void)   __attribute__((weak, alias("Default_Handler")));
void UsageFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void SVC_Handler(void)        __attribute__((weak, alias("Default_Handler")));
void DebugMon_Handler(void)   __attribute__((weak, alias("Default_Handler")));
void PendSV_Handler(void)     __attribute__((weak, alias("Default_Handler")));
void SysTick_Handler(void)    __attribute__((weak, alias("Default_Handler")));

/* Vector table, placed at the start of FLASH by the linker script (KEEP(*(.isr_vector))). */
__attribute__((section(".isr_vector"), used))
const uintptr_t g_vectors[16] = {
    (uintptr_t)&__StackTop,             /* initial SP */
    (uintptr_t)Reset_Handler,           /* thumb bit set by the compiler */
    (uintptr_t)NMI_Handler,        (uintptr_t)HardFault_Handler,
    (uintptr_t)MemManage_Handler,  (uintptr_t)BusFault_Handler,
    (uintptr_t)UsageFault_Handler, 0, 0, 0, 0,
    (uintptr_t)SVC_Handler,        (uintptr_t)DebugMon_Handler, 0,
    (uintptr_t)PendSV_Handler,     (uintptr_t)SysTick_Handler,
};

/*
 * The FreeBSD test VM's /sbin/init (cargo xtask freebsd-vm, its load/unload boot): the kernel
 * needs an init once it has mounted root, and krpc_rdma_kldtest.ko, not init, ends the run
 * (it powers the VM off). This one only sleeps, an hour at a time. No libc: a static
 * FreeBSD/amd64 executable of one function, nanosleep(2) (syscall 240) in a loop.
 */
__attribute__((naked, noreturn)) void
_start(void)
{
	__asm__ volatile(
	    "sub $16, %rsp\n"
	    "movq $3600, (%rsp)\n"	/* tv_sec */
	    "movq $0, 8(%rsp)\n"	/* tv_nsec */
	    "1:\n"
	    "mov $240, %eax\n"		/* SYS_nanosleep */
	    "mov %rsp, %rdi\n"
	    "xor %esi, %esi\n"
	    "syscall\n"
	    "jmp 1b\n");
}

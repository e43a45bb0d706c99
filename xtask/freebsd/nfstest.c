/*
 * The FreeBSD test VM's NFS boot (cargo xtask freebsd-vm, with an image built with
 * freebsd/patches/): /sbin/init of a kernel with krpc_rdma.ko preloaded and the krpc's RDMA
 * transport set to the software fabric (krpc_rdma.soft_fabric=1). It does what nfsd(8),
 * mountd(8) and mount_nfs(8) would, with the system calls they use:
 *
 *   1. nmount(2) a tmpfs on /export and export it to everyone (nmount MNT_UPDATE with an
 *      "export" struct export_args, as mountd does; root not squashed);
 *   2. sysctl vfs.nfsd.rdma_listen=20049, then fork an nfsd: nfssvc(NFSSVC_NFSDNFSD), which
 *      starts the RDMA listener on the NFS server's pool and serves;
 *   3. getfh(2) of /export (the NFSv3 root handle mountd would hand out), and nmount(2) an
 *      NFSv3 mount of it on /mnt with the patch's "rdma" option (port 20049);
 *   4. through the mount (soft, retrans=1, timeo=300: a stalled call fails the test in about
 *      a minute instead of being retried every few seconds): write 64 MiB to a file in 64 KiB
 *      writes without waiting for them (the buffer cache and the nfsiods send many WRITEs at
 *      once), fsync(2) and close; unmount and mount again (so the data comes back from the
 *      server, not the client's cache), read it back and compare; create 100 files, list the
 *      directory (getdirentries), remove them; unmount.
 *
 * One console line per step and "krpc_rdma nfstest: PASS: ..." or "... FAIL: ...", then the
 * VM is powered off. No libc: a static FreeBSD/amd64 executable, system calls by number
 * (sys/kern/syscalls.master), the few structures it passes laid out as 14.2's headers do.
 */
typedef unsigned long size_t;
typedef long ssize_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
typedef unsigned long uint64_t;

#define SYS_exit	1
#define SYS_fork	2
#define SYS_read	3
#define SYS_write	4
#define SYS_open	5
#define SYS_close	6
#define SYS_unlink	10
#define SYS_unmount	22
#define SYS_reboot	55
#define SYS_fsync	95
#define SYS_nfssvc	155
#define SYS_getfh	161
#define SYS_nanosleep	240
#define SYS_nmount	378
#define SYS_getdirentries 554
#define SYS___sysctlbyname 570

#define O_RDONLY	0x0000
#define O_WRONLY	0x0001
#define O_RDWR		0x0002
#define O_CREAT		0x0200
#define O_TRUNC		0x0400
#define O_DIRECTORY	0x00020000
#define RB_POWEROFF	0x4000
#define MNT_UPDATE	0x10000ULL
#define MNT_EXPORTED	0x100ULL
#define NFSSVC_NFSDNFSD	0x80
#define AUTH_SYS	1

#define NFS_RDMA_PORT	20049
#define FILE_BYTES	(64 << 20)
#define CHUNK		(64 << 10)
#define NFILES		100

struct iovec {
	const void *iov_base;
	size_t iov_len;
};

struct timespec {
	long tv_sec;
	long tv_nsec;
};

struct sockaddr_in {
	uint8_t sin_len;
	uint8_t sin_family;
	uint16_t sin_port;
	uint32_t sin_addr;
	char sin_zero[8];
};

/* fhandle_t: fsid_t, then struct fid (u_short len, u_short data0, char data[16]). */
struct fhandle {
	int fh_fsid[2];
	uint16_t fid_len;
	uint16_t fid_data0;
	char fid_data[16];
};

/* sys/mount.h */
struct export_args {
	uint64_t ex_flags;
	uint32_t ex_root;
	uint32_t ex_uid;
	int ex_ngroups;
	uint32_t *ex_groups;
	void *ex_addr;
	uint8_t ex_addrlen;
	void *ex_mask;
	uint8_t ex_masklen;
	char *ex_indexfile;
	int ex_numsecflavors;
	int ex_secflavors[5];
};

/* fs/nfs/nfs.h: nfssvc(NFSSVC_NFSDNFSD)'s old argument structure. */
struct nfsd_nfsd_oargs {
	const char *principal;
	int minthreads;
	int maxthreads;
};

_Static_assert(sizeof(struct fhandle) == 28, "fhandle_t");
_Static_assert(sizeof(struct export_args) == 96, "struct export_args");

static long
sc(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	unsigned char err;

	__asm__ volatile("syscall\n\tsetc %1"
	    : "+a"(n), "=r"(err), "+D"(a1), "+S"(a2), "+d"(a3), "+r"(r10), "+r"(r8), "+r"(r9)
	    :
	    : "rcx", "r11", "memory", "cc");
	return (err ? -n : n);
}

#define SC0(n)			sc((n), 0, 0, 0, 0, 0, 0)
#define SC1(n, a)		sc((n), (long)(a), 0, 0, 0, 0, 0)
#define SC2(n, a, b)		sc((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define SC3(n, a, b, c)		sc((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define SC4(n, a, b, c, d)	sc((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* fork(2): 0 in the child (rdx 1), the child's pid in the parent, -errno. */
static long
do_fork(void)
{
	long rax = SYS_fork, rdx = 0;
	unsigned char err;

	__asm__ volatile("syscall\n\tsetc %1"
	    : "+a"(rax), "=r"(err), "+d"(rdx)
	    :
	    : "rcx", "r11", "rdi", "rsi", "r8", "r9", "r10", "memory", "cc");
	if (err)
		return (-rax);
	return (rdx != 0 ? 0 : rax);
}

static int console = -1;
static char line[256];
static int at;

static size_t
slen(const char *s)
{
	size_t n = 0;

	while (s[n] != '\0')
		n++;
	return (n);
}

static void
put(const char *s)
{
	while (*s != '\0' && at < (int)sizeof(line) - 2)
		line[at++] = *s++;
}

static void
putn(long v)
{
	char b[24];
	int i = 0;

	if (v < 0) {
		put("-");
		v = -v;
	}
	do {
		b[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (i > 0 && at < (int)sizeof(line) - 2)
		line[at++] = b[--i];
}

static void
flush(void)
{
	line[at++] = '\n';
	if (console >= 0)
		SC3(SYS_write, console, line, at);
	at = 0;
}

static void
say(const char *what)
{
	put("krpc_rdma nfstest: ");
	put(what);
	flush();
}

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	SC2(SYS_nanosleep, &ts, 0);
}

__attribute__((noreturn)) static void
finish(int ok)
{
	say(ok ? "done" : "done, failed");
	sleep_ms(500);
	SC1(SYS_reboot, RB_POWEROFF);
	for (;;)
		sleep_ms(3600 * 1000);
}

__attribute__((noreturn)) static void
fail(const char *step, long err)
{
	put("krpc_rdma nfstest: FAIL: ");
	put(step);
	put(": error ");
	putn(err < 0 ? -err : err);
	flush();
	finish(0);
}

#define CHECK(r, step) do { long r_ = (r); if (r_ < 0) fail((step), r_); } while (0)

/* nmount(2) of name/value pairs (a value of NULL: the option without a value). */
static long
mount_opts(const char **opts, const void **vals, const size_t *lens, int n, long flags)
{
	struct iovec iov[32];
	int i;

	for (i = 0; i < n; i++) {
		iov[2 * i].iov_base = opts[i];
		iov[2 * i].iov_len = slen(opts[i]) + 1;
		iov[2 * i + 1].iov_base = vals[i];
		iov[2 * i + 1].iov_len = lens[i];
	}
	return (SC3(SYS_nmount, iov, 2 * n, flags));
}

static const void *
str(const char *s, size_t *len)
{
	*len = slen(s) + 1;
	return (s);
}

static struct fhandle rootfh;
static struct sockaddr_in server;

static void
mount_nfs(const char *step)
{
	const char *o[] = { "fstype", "fspath", "from", "hostname", "addr", "fh", "nfsv3",
	    "rdma", "soft", "retrans", "timeo" };
	const void *v[11];
	size_t l[11];

	v[0] = str("nfs", &l[0]);
	v[1] = str("/mnt", &l[1]);
	v[2] = str("localhost:/export", &l[2]);
	v[3] = str("localhost", &l[3]);
	v[4] = &server;
	l[4] = sizeof(server);
	v[5] = &rootfh;
	l[5] = sizeof(rootfh);
	v[6] = 0;
	l[6] = 0;
	v[7] = 0;
	l[7] = 0;
	v[8] = 0;
	l[8] = 0;
	v[9] = str("1", &l[9]);
	v[10] = str("300", &l[10]);
	CHECK(mount_opts(o, v, l, 11, 0), step);
}

static uint8_t
pat(long i)
{
	return ((uint8_t)((uint8_t)i * 131 + 7) ^ (uint8_t)(i >> 13));
}

static uint8_t buf[CHUNK];

static void
name_of(char *p, int i)
{
	const char *d = "/mnt/n";

	while (*d != '\0')
		*p++ = *d++;
	*p++ = (char)('0' + i / 100);
	*p++ = (char)('0' + i / 10 % 10);
	*p++ = (char)('0' + i % 10);
	*p = '\0';
}

int main(void);

int
main(void)
{
	struct export_args ea;
	struct nfsd_nfsd_oargs na;
	uint32_t gid0 = 0;
	const char *o[4];
	const void *v[4];
	size_t l[4];
	char dents[4096], name[16];
	long fd, n, off, pid, base, seen;
	int i, j;

	console = (int)SC3(SYS_open, "/dev/console", O_WRONLY, 0);
	say("starting (tmpfs export, nfsd with vfs.nfsd.rdma_listen, NFSv3 mount -o rdma, over "
	    "the software fabric)");

	/* 1. tmpfs on /export, exported to everyone, root not squashed. */
	o[0] = "fstype";
	v[0] = str("tmpfs", &l[0]);
	o[1] = "fspath";
	v[1] = str("/export", &l[1]);
	CHECK(mount_opts(o, v, l, 2, 0), "tmpfs on /export");
	for (i = 0; i < (int)sizeof(ea); i++)
		((char *)&ea)[i] = 0;
	ea.ex_flags = MNT_EXPORTED;
	ea.ex_root = 0;
	ea.ex_uid = 0;		/* maproot=root: the anonymous credential root calls map to */
	ea.ex_ngroups = 1;
	ea.ex_groups = &gid0;
	ea.ex_numsecflavors = 1;
	ea.ex_secflavors[0] = AUTH_SYS;
	o[2] = "export";
	v[2] = &ea;
	l[2] = sizeof(ea);
	CHECK(mount_opts(o, v, l, 3, MNT_UPDATE), "export /export");

	/* 2. The nfsd, listening on RDMA port 20049. */
	{
		const char *port = "20049";

		CHECK(sc(SYS___sysctlbyname, (long)"vfs.nfsd.rdma_listen",
		    (long)slen("vfs.nfsd.rdma_listen"), 0, 0, (long)port, (long)slen(port) + 1),
		    "sysctl vfs.nfsd.rdma_listen=20049");
	}
	pid = do_fork();
	CHECK(pid, "fork");
	if (pid == 0) {
		na.principal = "";
		na.minthreads = 2;
		na.maxthreads = 4;
		n = SC2(SYS_nfssvc, NFSSVC_NFSDNFSD, &na);
		fail("nfssvc(NFSSVC_NFSDNFSD) returned", n);
	}
	sleep_ms(1000);
	say("nfsd started");

	/* 3. The root handle and the mount. */
	CHECK(SC2(SYS_getfh, "/export", &rootfh), "getfh /export");
	server.sin_len = sizeof(server);
	server.sin_family = 2;
	server.sin_port = (uint16_t)((NFS_RDMA_PORT >> 8) | ((NFS_RDMA_PORT & 0xff) << 8));
	server.sin_addr = 0x0100007f;
	mount_nfs("mount -o rdma localhost:/export /mnt");
	say("mounted localhost:/export on /mnt over RDMA (software fabric)");

	/* 4. 64 MiB written (many WRITEs in flight), read back after a remount, compared. */
	fd = SC3(SYS_open, "/mnt/big", O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd, "create /mnt/big");
	for (off = 0; off < FILE_BYTES; off += CHUNK) {
		for (i = 0; i < CHUNK; i++)
			buf[i] = pat(off + i);
		n = SC3(SYS_write, fd, buf, CHUNK);
		CHECK(n, "write /mnt/big");
		if (n != CHUNK)
			fail("write /mnt/big: short", n);
		if (((off + CHUNK) & ((8 << 20) - 1)) == 0) {
			put("krpc_rdma nfstest: written ");
			putn((off + CHUNK) >> 20);
			put(" MiB");
			flush();
		}
	}
	CHECK(SC1(SYS_fsync, fd), "fsync /mnt/big");
	CHECK(SC1(SYS_close, fd), "close /mnt/big");
	CHECK(SC2(SYS_unmount, "/mnt", 0), "unmount after the write");
	mount_nfs("mount again");
	fd = SC3(SYS_open, "/mnt/big", O_RDONLY, 0);
	CHECK(fd, "open /mnt/big");
	for (off = 0; off < FILE_BYTES; off += n) {
		n = SC3(SYS_read, fd, buf, CHUNK);
		CHECK(n, "read /mnt/big");
		if (n == 0)
			fail("read /mnt/big: short file at", off);
		for (i = 0; i < n; i++)
			if (buf[i] != pat(off + i))
				fail("read /mnt/big: data differs at byte", off + i);
	}
	n = SC3(SYS_read, fd, buf, CHUNK);
	if (n != 0)
		fail("read /mnt/big: longer than written", n);
	CHECK(SC1(SYS_close, fd), "close /mnt/big");
	say("64 MiB written, read back after a remount, compared: equal");

	/* Many files: create, list, remove. */
	for (i = 0; i < NFILES; i++) {
		name_of(name, i);
		fd = SC3(SYS_open, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		CHECK(fd, "create a small file");
		buf[0] = (uint8_t)i;
		CHECK(SC3(SYS_write, fd, buf, 1 + i), "write a small file");
		CHECK(SC1(SYS_close, fd), "close a small file");
	}
	fd = SC3(SYS_open, "/mnt", O_RDONLY | O_DIRECTORY, 0);
	CHECK(fd, "open /mnt");
	seen = 0;
	base = 0;
	for (;;) {
		n = SC4(SYS_getdirentries, fd, dents, sizeof(dents), &base);
		CHECK(n, "getdirentries /mnt");
		if (n == 0)
			break;
		/* struct dirent: d_fileno 8, d_off 8, d_reclen 2, d_type 1, pad 1, d_namlen 2,
		 * pad 2, d_name. */
		for (j = 0; j < n;) {
			uint16_t reclen = *(uint16_t *)(dents + j + 16);
			uint16_t namlen = *(uint16_t *)(dents + j + 20);
			const char *nm = dents + j + 24;

			if (reclen == 0)
				break;
			if (namlen == 4 && nm[0] == 'n')
				seen++;
			j += reclen;
		}
	}
	CHECK(SC1(SYS_close, fd), "close /mnt");
	if (seen != NFILES)
		fail("listing /mnt: small files found", seen);
	for (i = 0; i < NFILES; i++) {
		name_of(name, i);
		CHECK(SC1(SYS_unlink, name), "remove a small file");
	}
	CHECK(SC1(SYS_unlink, "/mnt/big"), "remove /mnt/big");
	fd = SC3(SYS_open, "/mnt/n000", O_RDONLY, 0);
	if (fd >= 0)
		fail("a removed file still opens", fd);
	CHECK(SC2(SYS_unmount, "/mnt", 0), "unmount");
	say("PASS: NFSv3 over RPC-over-RDMA (FreeBSD nfsd and NFS client, the software fabric): "
	    "64 MiB written in 64 KiB writes, many in flight, read back after a remount and "
	    "compared; 100 files created, listed and removed; unmounted");
	finish(1);
}

__attribute__((naked, noreturn)) void
_start(void)
{
	__asm__ volatile(
	    "and $-16, %rsp\n"
	    "call main\n"
	    "1: jmp 1b\n");
}

//! What a traced process touched (`trace --footprint`), whether or not it uses a GPU: its syscalls
//! by kind, the files and sockets it opened with the bytes through each, the programs its children
//! ran, the libraries it mapped, its time on the CPU, and the requests it served (an MCP server: a
//! read on stdin or an accepted socket opens a request, the next write to stdout or that socket
//! closes it). Five rows cross the storage boundary, one table each; [`FootprintPart`] carries a
//! write of them together.

/// Syscalls of one kind by one process in one request, since the previous read of the kernel's
/// aggregates (`footprint_syscalls`: the rows of a (pid, request, nr) add up; `max_ns` is the
/// largest single call up to that read, so its figure is the MAX of the rows).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintSyscall {
    /// When the kernel's aggregates were read (unix ns).
    pub seen_at_ns: i64,
    /// The process.
    pub pid: u32,
    /// The request it served while making them (0: outside any request).
    pub request: u32,
    /// The syscall number (x86_64).
    pub nr: u32,
    /// Its name ([`syscall_name`]).
    pub name: String,
    /// Calls that returned in this interval.
    pub calls: i64,
    /// Of which returned an error (a negative value).
    pub errors: i64,
    /// Their time from entry to return, ns, summed.
    pub total_ns: i64,
    /// The longest single call so far, ns.
    pub max_ns: i64,
    /// Bytes moved by the reads and writes among them (their positive returns; 0 for other kinds).
    pub bytes: i64,
}

/// One process's time on the CPU in one request, since the previous read (`footprint_cpu`, rows
/// add up): from the kernel's context switches (a stretch is counted when the thread leaves the
/// CPU; a CPU's first stretch after the probes went in is not counted).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintCpu {
    /// When the kernel's aggregates were read (unix ns).
    pub seen_at_ns: i64,
    /// The process.
    pub pid: u32,
    /// The request it ran for (0: outside any request).
    pub request: u32,
    /// Time its threads ran on a CPU, ns.
    pub on_cpu_ns: i64,
    /// Times its threads left a CPU.
    pub switches: i64,
}

/// What a file descriptor of a traced process was, and what went through it (`footprint_fds`): one
/// row per opened file, connected, accepted or bound socket, duplicated descriptor, descriptor held
/// when the trace attached, or descriptor used without an open the trace saw (inherited), written
/// when it is closed or at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintFd {
    /// The process.
    pub pid: u32,
    /// The thread that opened it (0: not seen).
    pub tid: u32,
    /// The descriptor number.
    pub fd: i32,
    /// `file`, `socket`, `pipe`, `library` (a file mapped executable: a shared library or the
    /// program; `how` = `maps` when read from /proc/PID/maps), or `other`.
    pub kind: String,
    /// How it came: `open`, `connect`, `accept`, `bind`, `dup` (a copy made by dup, dup2, dup3 or
    /// fcntl: named as its original), `before_attach` (open when `trace --pid` attached: named from
    /// /proc), `inherited` (used without an open the trace saw), `maps`.
    pub how: String,
    /// The file's path as opened; a socket's peer (`127.0.0.1:5432`, `[::1]:80`, a Unix path) or,
    /// bound, its local address; what /proc named an inherited descriptor (`pipe:[123]`).
    pub name: String,
    /// When it was opened (unix ns; 0: before the trace).
    pub opened_ns: i64,
    /// When it was closed (unix ns; 0: still open at the end, or its process exited with it).
    pub closed_ns: i64,
    /// The open's flags (O_*) or, for a socket, the address family.
    pub flags: i64,
    /// The request during which it was opened (0: none).
    pub request: u32,
    /// Bytes read from it (positive returns of read, readv, pread64, preadv, recvfrom, recvmsg).
    pub bytes_read: i64,
    /// Bytes written to it (write, writev, pwrite64, pwritev, sendto, sendmsg, sendfile).
    pub bytes_written: i64,
    /// Read calls that moved bytes.
    pub reads: i64,
    /// Write calls that moved bytes.
    pub writes: i64,
    /// It was mapped executable (mmap with PROT_EXEC): a library.
    pub exec_mapped: bool,
}

/// One request a traced process served (`footprint_requests`): from the read that began it to the
/// write that answered it, with the first bytes of each.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintRequest {
    /// The serving process.
    pub pid: u32,
    /// The request's number, unique in the trace (1, 2, ...).
    pub request: u32,
    /// The descriptor it came on (0: stdin; else an accepted socket).
    pub fd: i32,
    /// The read that began it returned (unix ns).
    pub begin_ns: i64,
    /// The write that answered it returned (unix ns; 0: never answered while traced).
    pub end_ns: i64,
    /// Bytes of the read that began it.
    pub bytes_in: i64,
    /// Bytes of the write that answered it.
    pub bytes_out: i64,
    /// The first bytes read (up to 255, text with others escaped): a JSON-RPC request's method, an
    /// HTTP request's headers and the start of its body.
    pub head_in: String,
    /// The first bytes of the answer (up to 128).
    pub head_out: String,
}

/// A program a traced process (or a child it started) ran (`footprint_execs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintExec {
    /// When the exec succeeded (unix ns).
    pub ts_ns: i64,
    /// The process that exec'd.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// The request its parent served when it was started (0: none).
    pub request: u32,
    /// The program's path as exec'd.
    pub filename: String,
    /// Its arguments, space-separated (up to 256 bytes).
    pub argv: String,
}

/// Rows of the footprint tables written together.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FootprintPart {
    /// `footprint_syscalls`
    pub syscalls: Vec<FootprintSyscall>,
    /// `footprint_cpu`
    pub cpu: Vec<FootprintCpu>,
    /// `footprint_fds`
    pub fds: Vec<FootprintFd>,
    /// `footprint_requests`
    pub requests: Vec<FootprintRequest>,
    /// `footprint_execs`
    pub execs: Vec<FootprintExec>,
}

impl FootprintPart {
    /// No row at all.
    pub fn is_empty(&self) -> bool {
        self.syscalls.is_empty()
            && self.cpu.is_empty()
            && self.fds.is_empty()
            && self.requests.is_empty()
            && self.execs.is_empty()
    }
}

/// The name of x86_64 syscall `nr` (`syscall_N` for a number this table does not know).
pub fn syscall_name(nr: u32) -> String {
    match X86_64.get(nr as usize) {
        Some(n) if !n.is_empty() => (*n).to_string(),
        _ => format!("syscall_{nr}"),
    }
}

/// The x86_64 syscall number called `name` (as [`syscall_name`] gives it).
pub fn syscall_nr(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix("syscall_") {
        return n.parse().ok();
    }
    X86_64.iter().position(|n| *n == name).map(|i| i as u32)
}

/// x86_64 syscall names by number (the kernel's `asm/unistd_64.h`, and the numbers added up to 6.18); an empty string is an
/// unassigned number.
pub const X86_64: [&str; 468] = [
    "read",
    "write",
    "open",
    "close",
    "stat",
    "fstat",
    "lstat",
    "poll",
    "lseek",
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "ioctl",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "access",
    "pipe",
    "select",
    "sched_yield",
    "mremap",
    "msync",
    "mincore",
    "madvise",
    "shmget",
    "shmat",
    "shmctl",
    "dup",
    "dup2",
    "pause",
    "nanosleep",
    "getitimer",
    "alarm",
    "setitimer",
    "getpid",
    "sendfile",
    "socket",
    "connect",
    "accept",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "shutdown",
    "bind",
    "listen",
    "getsockname",
    "getpeername",
    "socketpair",
    "setsockopt",
    "getsockopt",
    "clone",
    "fork",
    "vfork",
    "execve",
    "exit",
    "wait4",
    "kill",
    "uname",
    "semget",
    "semop",
    "semctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "fcntl",
    "flock",
    "fsync",
    "fdatasync",
    "truncate",
    "ftruncate",
    "getdents",
    "getcwd",
    "chdir",
    "fchdir",
    "rename",
    "mkdir",
    "rmdir",
    "creat",
    "link",
    "unlink",
    "symlink",
    "readlink",
    "chmod",
    "fchmod",
    "chown",
    "fchown",
    "lchown",
    "umask",
    "gettimeofday",
    "getrlimit",
    "getrusage",
    "sysinfo",
    "times",
    "ptrace",
    "getuid",
    "syslog",
    "getgid",
    "setuid",
    "setgid",
    "geteuid",
    "getegid",
    "setpgid",
    "getppid",
    "getpgrp",
    "setsid",
    "setreuid",
    "setregid",
    "getgroups",
    "setgroups",
    "setresuid",
    "getresuid",
    "setresgid",
    "getresgid",
    "getpgid",
    "setfsuid",
    "setfsgid",
    "getsid",
    "capget",
    "capset",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigqueueinfo",
    "rt_sigsuspend",
    "sigaltstack",
    "utime",
    "mknod",
    "uselib",
    "personality",
    "ustat",
    "statfs",
    "fstatfs",
    "sysfs",
    "getpriority",
    "setpriority",
    "sched_setparam",
    "sched_getparam",
    "sched_setscheduler",
    "sched_getscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "mlock",
    "munlock",
    "mlockall",
    "munlockall",
    "vhangup",
    "modify_ldt",
    "pivot_root",
    "_sysctl",
    "prctl",
    "arch_prctl",
    "adjtimex",
    "setrlimit",
    "chroot",
    "sync",
    "acct",
    "settimeofday",
    "mount",
    "umount2",
    "swapon",
    "swapoff",
    "reboot",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "create_module",
    "init_module",
    "delete_module",
    "get_kernel_syms",
    "query_module",
    "quotactl",
    "nfsservctl",
    "getpmsg",
    "putpmsg",
    "afs_syscall",
    "tuxcall",
    "security",
    "gettid",
    "readahead",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "tkill",
    "time",
    "futex",
    "sched_setaffinity",
    "sched_getaffinity",
    "set_thread_area",
    "io_setup",
    "io_destroy",
    "io_getevents",
    "io_submit",
    "io_cancel",
    "get_thread_area",
    "lookup_dcookie",
    "epoll_create",
    "epoll_ctl_old",
    "epoll_wait_old",
    "remap_file_pages",
    "getdents64",
    "set_tid_address",
    "restart_syscall",
    "semtimedop",
    "fadvise64",
    "timer_create",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    "timer_delete",
    "clock_settime",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "exit_group",
    "epoll_wait",
    "epoll_ctl",
    "tgkill",
    "utimes",
    "vserver",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    "kexec_load",
    "waitid",
    "add_key",
    "request_key",
    "keyctl",
    "ioprio_set",
    "ioprio_get",
    "inotify_init",
    "inotify_add_watch",
    "inotify_rm_watch",
    "migrate_pages",
    "openat",
    "mkdirat",
    "mknodat",
    "fchownat",
    "futimesat",
    "newfstatat",
    "unlinkat",
    "renameat",
    "linkat",
    "symlinkat",
    "readlinkat",
    "fchmodat",
    "faccessat",
    "pselect6",
    "ppoll",
    "unshare",
    "set_robust_list",
    "get_robust_list",
    "splice",
    "tee",
    "sync_file_range",
    "vmsplice",
    "move_pages",
    "utimensat",
    "epoll_pwait",
    "signalfd",
    "timerfd_create",
    "eventfd",
    "fallocate",
    "timerfd_settime",
    "timerfd_gettime",
    "accept4",
    "signalfd4",
    "eventfd2",
    "epoll_create1",
    "dup3",
    "pipe2",
    "inotify_init1",
    "preadv",
    "pwritev",
    "rt_tgsigqueueinfo",
    "perf_event_open",
    "recvmmsg",
    "fanotify_init",
    "fanotify_mark",
    "prlimit64",
    "name_to_handle_at",
    "open_by_handle_at",
    "clock_adjtime",
    "syncfs",
    "sendmmsg",
    "setns",
    "getcpu",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "finit_module",
    "sched_setattr",
    "sched_getattr",
    "renameat2",
    "seccomp",
    "getrandom",
    "memfd_create",
    "kexec_file_load",
    "bpf",
    "execveat",
    "userfaultfd",
    "membarrier",
    "mlock2",
    "copy_file_range",
    "preadv2",
    "pwritev2",
    "pkey_mprotect",
    "pkey_alloc",
    "pkey_free",
    "statx",
    "io_pgetevents",
    "rseq",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "pidfd_send_signal",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pidfd_open",
    "clone3",
    "close_range",
    "openat2",
    "pidfd_getfd",
    "faccessat2",
    "process_madvise",
    "epoll_pwait2",
    "mount_setattr",
    "quotactl_fd",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "memfd_secret",
    "process_mrelease",
    "futex_waitv",
    "set_mempolicy_home_node",
    // 451.. (kernels newer than this header)
    "cachestat",
    "fchmodat2",
    "map_shadow_stack",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "statmount",
    "listmount",
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
    "mseal",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
    "open_tree_attr",
];

/// The SQL of each figure `causeway footprint` (and the MCP `get_footprint`) gives for one
/// process, with `{pid}` standing for its pid: (figure, SQL). The answer recomputes every figure
/// from the rows these read; `describe_schema` lists them.
pub const FIGURE_SQL: [(&str, &str); 8] = [
    (
        "syscalls",
        "SELECT name, sum(calls) AS calls, sum(errors) AS errors, sum(total_ns) AS total_ns, max(max_ns) AS max_ns, \
sum(bytes) AS bytes FROM footprint_syscalls WHERE pid = {pid} GROUP BY name ORDER BY calls DESC, name",
    ),
    (
        "files",
        "SELECT name, count(*) AS opens, sum(bytes_read) AS bytes_read, sum(bytes_written) AS bytes_written, \
sum(reads) AS reads, sum(writes) AS writes FROM footprint_fds WHERE pid = {pid} AND kind IN ('file', 'pipe', 'other') \
GROUP BY name ORDER BY sum(bytes_read) + sum(bytes_written) DESC, name",
    ),
    (
        "sockets",
        "SELECT how, name, count(*) AS opens, sum(bytes_read) AS bytes_read, sum(bytes_written) AS bytes_written \
FROM footprint_fds WHERE pid = {pid} AND kind = 'socket' GROUP BY how, name ORDER BY sum(bytes_read) + sum(bytes_written) DESC, how, name",
    ),
    (
        "libraries",
        "SELECT DISTINCT name FROM footprint_fds WHERE pid = {pid} AND exec_mapped = 1 ORDER BY name",
    ),
    (
        "children",
        "SELECT f.arg1 AS child, f.timestamp AS started_ns, (SELECT count(*) FROM footprint_execs x WHERE x.pid = f.arg1) \
AS execs, (SELECT x.argv FROM footprint_execs x WHERE x.pid = f.arg1 ORDER BY x.ts_ns DESC LIMIT 1) AS ran_last \
FROM events f WHERE f.source = 3 AND f.op = 7 AND f.pid = {pid} AND f.arg1 <> f.pid ORDER BY f.timestamp, f.arg1",
    ),
    ("on_cpu", "SELECT sum(on_cpu_ns) AS on_cpu_ns, sum(switches) AS switches FROM footprint_cpu WHERE pid = {pid}"),
    (
        "off_cpu",
        "SELECT prev_state, sum(duration) AS off_cpu_ns, count(*) AS intervals FROM events \
WHERE source = 3 AND op = 1 AND pid = {pid} GROUP BY prev_state ORDER BY prev_state",
    ),
    (
        "requests",
        "SELECT r.request, r.begin_ns, r.end_ns, r.bytes_in, r.bytes_out, r.head_in, \
(SELECT coalesce(sum(s.calls), 0) FROM footprint_syscalls s WHERE s.request = r.request) AS syscalls \
FROM footprint_requests r WHERE r.pid = {pid} ORDER BY r.request",
    ),
];

/// The SQL of `figure` for process `pid` ([`FIGURE_SQL`]).
pub fn figure_sql(figure: &str, pid: u32) -> Option<String> {
    FIGURE_SQL.iter().find(|(f, _)| *f == figure).map(|(_, sql)| sql.replace("{pid}", &pid.to_string()))
}

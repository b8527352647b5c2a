# Shared by scripts/serve-power-loss.sh and scripts/raft-power-loss.sh: the steps of a power
# cut (root needed).

# Stops process $1 (SIGSTOP) and waits until it is stopped. A process is stopped before its
# file system is cut: an fdatasync under way as the file system shuts down may return success
# for bytes that never reach the disk, which after a real power cut no process would live to
# act on (crates/sluice-cli/tests/kill.rs, `stop`).
stop_process() {
    kill -STOP "$1"
    until [[ $(awk '{ print $3 }' "/proc/$1/stat") == T ]]; do sleep 0.01; done
}

# Shuts the file system mounted at $1 down without flushing its journal (EXT4_IOC_SHUTDOWN with
# EXT4_GOING_FLAGS_NOLOGFLUSH, what xfstests' godown does): nothing more reaches the disk, and
# nothing unsynced survives.
cut_fs() {
    python3 -c 'import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(fd, 0x8004587d, struct.pack("I", 2))' "$1"
}

#!/usr/bin/env python3
"""Drops a directory's files from the OS page cache (posix_fadvise DONTNEED),
so that the next read of them goes to the disk. Needs no root, unlike
/proc/sys/vm/drop_caches. Usage: scripts/evict-page-cache.py DIR"""
import os
import sys

for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

#!/usr/bin/env python3
"""Runs a command and prints, as GNU `time -v` does, the lines bench/import.sh reads: for a
machine without GNU time (the GPU host). Usage: bench/time.py -v COMMAND [ARG...]"""
import resource
import subprocess
import sys
import time

args = sys.argv[1:]
if args[:1] == ["-v"]:
    args = args[1:]
start = time.monotonic()
rc = subprocess.call(args)
wall = time.monotonic() - start
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
minutes, seconds = divmod(wall, 60)
sys.stderr.write(
    f"\tUser time (seconds): {ru.ru_utime:.2f}\n"
    f"\tSystem time (seconds): {ru.ru_stime:.2f}\n"
    f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {int(minutes)}:{seconds:05.2f}\n"
    f"\tMaximum resident set size (kbytes): {ru.ru_maxrss}\n"
)
sys.exit(rc)

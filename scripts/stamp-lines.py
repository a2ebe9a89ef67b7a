"""Copy standard input to standard output, each line led by the seconds since this began
(one decimal): a long command's log says when each of its lines came.
    COMMAND 2>&1 | python3 -u scripts/stamp-lines.py"""
import sys
import time

started = time.monotonic()
for line in sys.stdin:
    sys.stdout.write(f"{time.monotonic() - started:7.1f} {line}")

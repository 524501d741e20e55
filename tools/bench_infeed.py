"""Infeed benchmark (same as ``tpudata bench infeed``): see tpudata/commands/bench.py.

    python tools/bench_infeed.py [--steps 30] [--parallel 1 2 4 8 16] [--latency-ms 50]
"""

import argparse
import logging
import sys

from tpudata.commands import bench

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=bench.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(parser)
    logging.basicConfig(level=logging.WARNING)
    sys.exit(bench.cmd_infeed(parser.parse_args()))

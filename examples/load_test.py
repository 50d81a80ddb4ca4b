"""A load test from code: 2 producers and 2 consumers, receipts on, then the figures.

    python examples/load_test.py [COUNT]

Without STOMPFAST_URL the load generator runs against its own in-process broker. The
same run from the shell: stompfast bench --producers 2 --consumers 2 --count 20000 --receipts
"""

from __future__ import annotations

import os
import sys

from stompfast.loadgen import LoadConfig, run

if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    result = run(LoadConfig(url=os.environ.get("STOMPFAST_URL"), producers=2, consumers=2, count=count,
                            receipts=True))
    print(f"ok={result.ok} sent={result.counts['sent']} received={result.counts['received']}"
          f" missing={result.counts['missing']} p99={result.latency_us['p99']:.0f} us"
          f" send rate={result.rates['send_msgs_per_s']:,.0f}/s")
    sys.exit(0 if result.ok else 1)

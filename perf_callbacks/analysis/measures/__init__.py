"""What an expert reads after the verdict: top operators, collectives, transfers, launch latency and their lines."""

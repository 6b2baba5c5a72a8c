"""The check() and failure list shared by the V4.1 self-test modules (test_v41.py runs them)."""
import torch

F64 = torch.float64
FAILS = []


def check(name, ok, detail=""):
    """Print ok/FAIL with a detail; failures are collected for the exit status."""
    print(("ok   " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILS.append(name)

"""Test support shared by the suites and the benchmarks (testing/README.md)."""

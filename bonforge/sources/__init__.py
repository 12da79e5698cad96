"""Reading problem sets and their test formats (APPS, HumanEval, LiveCodeBench, ...) into bonforge records."""

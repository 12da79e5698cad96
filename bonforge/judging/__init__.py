"""How a candidate is judged: code verdicts (programs run in the sandbox, checks, output comparison) and
math verdicts."""

"""The GenSelect and FusioN library the stages share: selection prompts (their wording lives in
``bonforge/templates/``), the candidate draws of GenSelect, the judged pool read by problem, Best-of-N metrics
(pass@k, max@k, majority@k), the LLM selector, the attribution of fused answers to teachers, Best-of-N picks and
the SFT rows of chosen answers. It imports no stage."""

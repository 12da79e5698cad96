"""bonforge: a data factory for Best-of-N training data.

Importing the package is inert: no Ray, Prefect, Docker or GPU is touched until a command runs.
"""

__version__ = "0.1.0"

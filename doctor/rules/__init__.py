"""The facts rules, one module per block of codes; codes.py says which module holds which."""

"""The static rules DDP101-DDP127, one module per theme; codes.py says which holds which.

None imports torch.
"""

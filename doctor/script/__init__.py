"""`ddp-doctor check`: static analysis of training scripts for DDP and DataParallel mistakes.

Never imports or runs the user's code, and never imports torch. runner.check_paths is the entry
point; walker.py makes the single pass over each file's AST and rules/ reads what it recorded.
"""

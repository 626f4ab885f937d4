"""`workbench decode`: the command (cli.py), one run of the engine over prompts (run.py), reading
prompts from text or token ids (prompts.py)."""

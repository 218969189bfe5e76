"""Reading a hung job: what each rank is doing, which ranks are the odd ones out, and why.

Pure: the probe (probes/hang) reads the processes' stacks and the user's source files; this package
classifies each rank's stack, groups the ranks, and turns the picture into knowledge-base entries.
"""

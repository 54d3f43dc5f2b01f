"""The node process and its edges (DESIGN.md section 4): configuration, transport, runtime.

Only the runtime and link modules await; ``node.config.model`` is pure.
"""

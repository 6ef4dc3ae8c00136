"""The client side of a disthook cluster (see ../shared/DESIGN.md).

``spec`` turns modules into data and back, the form in which a stage travels to a worker.
"""

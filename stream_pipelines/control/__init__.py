"""What operators want of each app and who runs it.

control_store  every control record (desired state, stop marker, running, exit, restarts), one store
lease          one owner per app: the lease beside its checkpoints, renewed by the driver
"""

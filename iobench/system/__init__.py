"""The machine: one sysfs/procfs layer, topology, tuning, the write guard, locks, processes, observation."""

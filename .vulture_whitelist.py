"""Names vulture (`make lint`) would call unused that are used in ways it cannot see.

vulture's whitelist format: each line uses a name (`_.name` for an attribute or
method), so vulture counts it as used. Every entry says why it is alive. An entry
marked "left for a later pass" is dead code in a module being reworked elsewhere;
remove the code (and the entry) when that module is next edited.
"""
# ruff: noqa

# Module-level __getattr__ (PEP 562): the public API and parse_fio's names load on first use.
__getattr__  # iobench/__init__.py, iobench/results/fioout/__init__.py

# The agent's requests: iobench/agent/serve.py dispatches each by name (getattr(agent, "op_" + op)).
_.op_read
_.op_folders
_.op_identity
_.op_make_files
_.op_write
_.op_writable
_.op_exists
_.op_is_dir
_.op_realpath
_.op_list_dir
_.op_stat
_.op_folder
_.op_sync
_.op_snapshot
_.op_sample
_.op_edge
_.op_states
_.op_looks
_.op_processes
_.op_exits
_.op_claimed
_.op_readable
_.op_run
_.op_programs
_.op_lock
_.op_kill
_.op_serve_fio
_.op_server_alive
_.op_leftovers
_.op_remove

# Typer commands: registered on the app by their decorators, called by Typer.
_.system_show  # iobench/cli/commands.py
_.system_tune  # iobench/cli/commands.py
_.system_reset  # iobench/cli/commands.py
_.history_add  # iobench/cli/history_commands.py
_.history_changes  # iobench/cli/history_commands.py
_.history_plot  # iobench/cli/history_commands.py

# rich calls Console.on_broken_pipe when stdout's reader goes away (iobench/cli/compare_view.py).
_.on_broken_pipe

# pydantic: model_config is read by pydantic; model_serializer methods are called when a record
# is dumped; record fields are written to and read from meta.json, manifest.json and journals.
_.model_config  # iobench/matrix/model.py, iobench/store/records.py
_._without_absent_host  # iobench/store/records.py
_._without_empty_hosts  # iobench/store/records.py
_.client_port  # iobench/store/records.py: a process's record in meta.json
_.schema_version  # iobench/store/records.py: every record's version, for migrations
_.python  # iobench/store/records.py: MachineFacts, in manifest.json
_.iobench_version  # iobench/store/records.py: MachineFacts, in manifest.json
_.numactl_version  # iobench/store/records.py: MachineFacts, in manifest.json

# Dataclass fields filled from /proc/diskstats by position; iobench/results/samples.py reads them by name.
_.read_ms  # iobench/system/hostfs.py DiskStat
_.write_ms
_.discards
_.discards_merged
_.sectors_discarded
_.discard_ms
_.flushes
_.flush_ms

# msgspec Struct fields of fio's "job options", decoded from JSON; iobench/results/fioout/joboptions.py
# reads them with getattr by option name (OPTION_DTYPES, ALIASES).
_.readwrite  # iobench/results/fioout/jsondoc.py JobOptions
_.bs
_.blocksize
_.iodepth
_.ioengine
_.direct
_.rwmixread

# Judgement's fields: iobench/results/compare.py copies them into the comparison's rows with
# getattr over RESULT_COLUMNS.
_.a_n
_.a_mean
_.a_std
_.b_n
_.b_mean
_.b_std
_.ratio_ci_low
_.ratio_ci_high
_.p_value

# Public functions users call (documented), not the package.
noise_table  # iobench/answers/history.py: docs/history.md
markdown_table  # iobench/results/schema.py: prints docs/frame.md's table; tests/test_schema.py compares

# Dead, in modules being reworked elsewhere:
LOG_KINDS  # iobench/planner/timelogs.py: left for a later pass
point_frame  # iobench/results/assemble.py: left for a later pass (only tests call it)
THRESHOLDS  # iobench/results/validity.py: left for a later pass (only tests read it)
CHECKS  # iobench/results/validity.py: left for a later pass (only tests read it)
device_refusal  # iobench/system/safety.py: left for a later pass (only tests call it)
LOADS  # iobench/matrix/slospec.py: left for a later pass (a new module, its owner's)
latency_maps  # iobench/results/histlogs.py: left for a later pass (only tests call it)

"""MetaSchedule tuning of the kernels a fusion strategy produces.

* :mod:`.strategy` - :func:`tune` / :func:`tune_strategy`: fuse, then tune with the target's driver;
* :mod:`.cpu` - the CPU driver (MetaSchedule's own space; local or RPC measurement);
* :mod:`.dsa` - the DSA design space and driver (simulated builder and runner);
* :mod:`.core` - the report, resume bookkeeping and failure threshold both drivers share;
* :mod:`.database` - checked opening of a work directory's database (:func:`open_records`);
* :mod:`.ms_builder` - the in-process builder, tensor intrinsics on demand, loggers, progress bar.
"""

from .core import DONE_FILE, FAILED_SECS, TaskReport, TuneReport
from .cpu import TRIALS_PER_ITER, local_runner, parse_tracker, rpc_runner, tuning_target
from .database import RECORD_FILE, WORKLOAD_FILE, TuningRecordsWarning, open_records
from .strategy import tune, tune_strategy

__all__ = ["DONE_FILE", "FAILED_SECS", "RECORD_FILE", "TRIALS_PER_ITER", "WORKLOAD_FILE", "TaskReport",
           "TuneReport", "TuningRecordsWarning", "local_runner", "open_records", "parse_tracker",
           "rpc_runner", "tune", "tune_strategy", "tuning_target"]

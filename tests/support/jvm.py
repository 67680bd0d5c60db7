"""The settings of every Spark JVM the tests start, and the directory on the path of each Python process they start."""

from __future__ import annotations

import pathlib
import sys

#: On the PYTHONPATH of every Python process a Spark JVM of the tests starts: its sitecustomize has them import
#: pyspark compiled (not from Spark's pyspark.zip, compiled anew by each) and, when asked, logs their AWS calls.
AUDIT_DIR = pathlib.Path(__file__).resolve().parents[1] / "spark" / "audit"

#: The class-data archive of Spark's classes that ``make test`` writes (tests/support/jvm_archive.py) into the
#: virtual environment whose pyspark the JVMs run: each Spark JVM maps the classes it holds instead of loading
#: them from the jars. The cluster module, alternated: 93 s of CPU in its JVMs without, 59 s with.
CLASS_ARCHIVE = pathlib.Path(sys.prefix) / "spark-classes.jsa"

# Every JVM the Spark tests start (the local session's, a cluster's master, workers, executors and
# drivers, a Spark example of the docs) compiles with C1 only and collects with the serial collector:
# their work is start-up and small batches, where C2 and a parallel collector cost CPU that the rest of
# the suite needs on a 2-core machine. Measured on the cluster's availableNow test: 107 s of CPU and
# 135 s of wall time without, 61 s and 100 s with. They also skip verifying the bytecode of Spark's own
# jars and keep no performance-data file: a local session's start and first query, 11.8 s of CPU without
# (5 runs), 10.7 s with.
LEAN_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote -XX:-UsePerfData"
)
# The archive only when it is there (naming a missing one turns off the JDK's own archive too); a JVM that
# cannot use it (another Java build, another class path) runs without it and says nothing (-Xlog:cds*=off).
LEAN_JVM = {
    "JAVA_TOOL_OPTIONS": LEAN_JVM_OPTIONS
    + (f" -XX:SharedArchiveFile={CLASS_ARCHIVE} -Xlog:cds*=off" if CLASS_ARCHIVE.is_file() else "")
}

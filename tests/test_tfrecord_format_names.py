"""The names the TFRecord format answers to, in sessions a test cannot share: one built after
importing sparktrain, and one where another library's jar already claims ``tfrecord`` (as
LinkedIn's spark-tfrecord does). Each runs in a process of its own, since a process holds one
SparkContext and its jars."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.spark

PYSPARK_4 = int(pyspark.__version__.split(".")[0]) >= 4

# A DataSourceRegister that claims the short name, as another library's jar would.
OTHER_SOURCE = """
package other;

public class OtherTFRecord implements org.apache.spark.sql.sources.DataSourceRegister {
    @Override
    public String shortName() {
        return "tfrecord";
    }
}
"""

SESSION = """
import sys
import sparktrain.tfrecord as tfrecord  # before any session exists, as a new user would
from pyspark.sql import SparkSession

builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
if len(sys.argv) > 2:
    builder = builder.config("spark.jars", sys.argv[2])
spark = builder.getOrCreate()
out = sys.argv[1]
"""


def run_script(body: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SESSION + body, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


# The sessions of these two have no sparktrain jar: the names resolve to the Python data source,
# which PySpark 3.5 does not have.
@pytest.mark.spark4
def test_a_session_built_after_the_import_reads_and_writes_the_format(tmp_path: Path) -> None:
    printed = run_script(
        """
df = spark.range(12).selectExpr("id", "cast(id as string) as s")
df.write.format("tfrecord").mode("append").save(out)
print("rows", spark.read.format("tfrecord").load(out).count())
print("own", spark.read.format("sparktrain.tfrecord").schema("s string").load(out).count())
print("new session", spark.newSession().read.format("tfrecord").load(out).count())
""",
        str(tmp_path / "out"),
    )
    assert printed.split("\n")[:3] == ["rows 12", "own 12", "new session 12"]


@pytest.mark.spark4
def test_another_jar_holding_the_name_breaks_nothing_of_sparktrain(tmp_path: Path) -> None:
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if (javac is None or jar is None) and os.environ.get("CI") != "true":
        pytest.skip("needs a JDK (javac and jar) to build the other library's jar")
    source = tmp_path / "src" / "other" / "OtherTFRecord.java"
    source.parent.mkdir(parents=True)
    source.write_text(OTHER_SOURCE)
    classes = tmp_path / "classes"
    services = classes / "META-INF" / "services"
    services.mkdir(parents=True)
    (services / "org.apache.spark.sql.sources.DataSourceRegister").write_text("other.OtherTFRecord\n")
    spark_jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run(
        [str(javac), "-d", str(classes), "-cp", f"{spark_jars}/*", str(source)], check=True, timeout=120
    )
    other_jar = tmp_path / "other.jar"
    subprocess.run([str(jar), "cf", str(other_jar), "-C", str(classes), "."], check=True, timeout=60)

    printed = run_script(
        """
df = spark.range(12).selectExpr("id", "cast(id as string) as s")
print("written", tfrecord.write(df, out).rows)
print("read", tfrecord.read_dataframe(spark, out).count())
print("own", spark.read.format("sparktrain.tfrecord").load(out).count())
try:
    spark.read.format("tfrecord").load(out).count()
except Exception as e:
    print("tfrecord is theirs:", "not a valid Spark SQL Data Source" in str(e))
""",
        str(tmp_path / "out"),
        str(other_jar),
    )
    assert printed.split("\n")[:4] == ["written 12", "read 12", "own 12", "tfrecord is theirs: True"]


@pytest.mark.skipif(
    PYSPARK_4, reason="what PySpark 3.5, which has no Python data sources, does without the jar"
)
def test_on_pyspark_3_5_without_the_jar_write_and_read_work_and_register_says_what_to_use(
    tmp_path: Path,
) -> None:
    printed = run_script(
        """
import pyspark_sparktrain, pyspark_sparktrain_tfrecord  # PySpark 4's lookup modules: harmless here
print("lookup modules", hasattr(pyspark_sparktrain, "DefaultSource"))
df = spark.range(12).selectExpr("id", "cast(id as string) as s")
print("written", tfrecord.write(df, out, num_files=2).rows)
back = tfrecord.read_dataframe(spark, out)
print("read", sorted((r.id, r.s) for r in back.collect()) == [(i, str(i)) for i in range(12)])
try:
    tfrecord.register(spark)
except Exception as e:
    print(type(e).__name__, "read_dataframe" in str(e), "jar_path" in str(e), e.package)
""",
        str(tmp_path / "out"),
    )
    assert printed.split("\n")[:4] == [
        "lookup modules False",
        "written 12",
        "read True",
        "MissingDependencyError True True pyspark",
    ]

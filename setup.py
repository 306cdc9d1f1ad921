"""Build hook for what pyproject.toml cannot say: folders that live outside ``flowcast/``.

The Spark jobs (``spark/``) and the examples (``houses/``, ``flows/``,
``behaviors/``) stay at the top of the checkout, where ``spark-submit
spark/all.py`` and ``flowcast run houses/pingpong-alpha.yaml`` find them.
An installed flowcast has no checkout, so the wheel maps them into the
package: ``flowcast/export/spark_jobs/`` for ``flowcast spark`` and
``flowcast/house/examples/{houses,flows,behaviors}/`` for ``flowcast
demo``.  ``[tool.setuptools.packages.find]`` cannot add mapped folders to
what it discovers, so the package list is made here: every ``flowcast*``
package found as before, plus the mapped ones.

The globs name files, never folders, so a checkout's ``houses/run/`` and
``houses/keeps/`` (logs, keys) are never packaged.
"""

from setuptools import find_packages, setup

#: package -> the checkout folder it is built from
BUNDLED = {
    "flowcast.export.spark_jobs": "spark",
    "flowcast.house.examples.houses": "houses",
    "flowcast.house.examples.flows": "flows",
    "flowcast.house.examples.behaviors": "behaviors",
}

setup(
    packages=[*find_packages(include=["flowcast", "flowcast.*"]), *BUNDLED],
    package_dir=BUNDLED,
    package_data={
        "flowcast.house.examples.houses": ["*.yaml", "README.md"],
        "flowcast.house.examples.flows": ["*.flo", "*.yaml", "*.txt"],
    },
)

"""One DAG per suite file under include/suites/ (see brokerbench.dag_factory).

Kept thin on purpose: everything lives in the brokerbench package.
"""

from brokerbench.dag_factory import build_all_dags

globals().update(build_all_dags())

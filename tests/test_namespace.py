"""kbflow inside a user's own Prefect project that has its own `flows` package.

Everything kbflow installs lives under `kbflow.`, so the project's `flows/reindex.py` and
`flows/lookup.py` never shadow ours: the project's flow calls kbflow's task and
`lookup_knowledge` and gets the answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import run_cli, write_doc

USER_FLOW = '''
from prefect import flow

from flows.reindex import OUR_OWN  # the project's own module of that name
from kbflow.flows.lookup import lookup_knowledge_task
from kbflow.retrieval import lookup_knowledge


@flow
def triage(alert: str, home: str) -> dict:
    evidence = lookup_knowledge_task(alert, kb_scope="payments", agent=True, home=home)
    return {"ours": OUR_OWN, "task": evidence}
'''


def test_a_project_with_its_own_flows_package_uses_kbflow(tmp_path, settings, prefect_harness):
    from prefect.settings import PREFECT_API_URL

    docs = tmp_path / "docs"
    write_doc(docs, "pool.md", source="pool-exhausted", scope="payments",
              body="# Pool\n\n## Fix\n\nRaise maxPoolSize when the payments pool is exhausted.\n")
    assert run_cli("reindex", str(docs), home=settings.home).returncode == 0  # as a user runs it
    project = tmp_path / "myproj"
    (project / "flows").mkdir(parents=True)
    (project / "flows" / "__init__.py").write_text("")
    (project / "flows" / "reindex.py").write_text("OUR_OWN = 'the project reindex'\n")
    (project / "flows" / "lookup.py").write_text("raise ImportError('the project lookup: never kbflow')\n")
    (project / "flows" / "triage.py").write_text(textwrap.dedent(USER_FLOW))
    home = str(settings.home)
    script = (
        "import json, sys; from flows.triage import triage; from kbflow.retrieval import lookup_knowledge;"
        "from kbflow.core.settings import Settings;"
        f"out = triage('payments pool exhausted', {home!r});"
        "direct = lookup_knowledge('pool exhausted', kb_scope='payments',"
        f" settings=Settings(home={home!r}));"
        "print(json.dumps({**out, 'direct': direct.evidence[0].source}))"
    )
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(project)}
    res = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["ours"] == "the project reindex"
    assert out["task"]["evidence_status"] == "FOUND" and out["direct"] == "pool-exhausted"
    assert Path(project / "flows" / "reindex.py").read_text().startswith("OUR_OWN")

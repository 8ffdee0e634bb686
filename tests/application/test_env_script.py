"""tools/env.sh as a user meets it: the stack it picks, and what a failing step leaves behind.

The happy path (creating a venv and installing both stacks) is what ./run_tests.sh itself runs
first, on the CI's two legs (.ci/run); here the checks that need no install: an interpreter that
does not run stops it with one line before anything is installed, and sourcing it never exits
the user's shell nor leaves ``set -e`` / ``pipefail`` changed.
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository


def _bash(script, tmp_path, **env):
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PINN_") and k != "VIRTUAL_ENV"}
    run_env.update(PINN_VENV=str(tmp_path / "venv"), **env)
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=run_env, capture_output=True, text=True,
                          timeout=120)


def test_a_python_that_does_not_run_stops_it_with_one_line(tmp_path):
    run = _bash('. tools/env.sh; echo "status=$?"; echo "options=$-"; shopt -qo pipefail && echo pipefail-on; '
                'echo "still here"', tmp_path, PINN_PYTHON="/nonexistent/python3.12")
    assert "still here" in run.stdout and "status=1" in run.stdout, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("[pinn env]")]
    assert errors == ["[pinn env] error: PINN_PYTHON=/nonexistent/python3.12 does not run (name an interpreter "
                      "that runs, or its path)"], run.stderr
    assert "e" not in run.stdout.split("options=")[1].split()[0]  # set -e not left on
    assert "pipefail-on" not in run.stdout
    assert not (tmp_path / "venv").exists()  # nothing created, nothing installed


def test_the_callers_shell_options_come_back(tmp_path):
    """A caller with pipefail on and errexit off keeps exactly those after a failing source."""
    run = _bash('set -o pipefail; set +e; . tools/env.sh; echo "status=$?"; shopt -qo pipefail && echo pipefail-on; '
                'shopt -qo errexit && echo errexit-on; echo end', tmp_path, PINN_PYTHON="/nonexistent/python3")
    assert "status=1" in run.stdout and "pipefail-on" in run.stdout and "errexit-on" not in run.stdout
    assert run.stdout.rstrip().endswith("end")


def test_a_set_e_script_stops_where_the_environment_fails(tmp_path):
    """quickstart.sh runs with set -e: a failed set-up must stop it there (errexit came back off before 0.18.0,
    as a command substitution runs without it, so the steps after it ran and failed in turn)."""
    run = _bash('set -euo pipefail; . tools/env.sh; echo "still here"', tmp_path, PINN_PYTHON="/nonexistent/python3")
    assert run.returncode == 1 and "still here" not in run.stdout, run.stdout + run.stderr


def test_run_not_sourced_it_exits_with_the_status(tmp_path):
    run = _bash("bash tools/env.sh; echo \"status=$?\"", tmp_path, PINN_PYTHON="/nonexistent/python3")
    assert "status=1" in run.stdout and "does not run" in run.stderr

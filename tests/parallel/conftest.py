"""The launchers of the parallel tests as fixtures (training_runs.LAUNCHERS)."""
import pytest
from training_runs import LAUNCHERS, command_of


@pytest.fixture(params=sorted(LAUNCHERS))
def launcher(request):
    available, _ = LAUNCHERS[request.param]
    if not available():
        pytest.skip(f"{request.param}: launcher, Horovod controller or mpi4py not installed")
    return request.param, command_of(request.param)


@pytest.fixture
def one_launcher():
    """The first launcher that works (Gloo first), for tests whose subject is not the controller: the
    controllers are compared in test_two_ranks_equal_one_process_on_the_union."""
    for name in sorted(LAUNCHERS):
        available, _ = LAUNCHERS[name]
        if available():
            return name, command_of(name)
    pytest.skip("no launcher with a Horovod controller installed")

"""TensorFlow's C++ start-up lines, which the pinn command and the input scripts hide unless asked (pinn.runtime)."""
import os
import re

#: the lines a user sees at TensorFlow's start and at its XLA compilations when nothing hides them
TF_STARTUP = ("oneDNN custom operations are on", "This TensorFlow binary is optimized", "SetPriority unimplemented")
#: any INFO, WARNING or ERROR line of TensorFlow's C++ logging ("2026-01-01 12:00:00.000000: E external/...")
#: or of its absl logging ("I0000 00:00:1795697042.648025   21019 device_compiler.h:186] ...")
TF_CPP_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d [\d:.]+: [IWE] |[IWE]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] )")
#: the two lines TensorFlow 2.15 writes through absl at the first XLA compilation of a process: they ignore
#: TF_CPP_MIN_LOG_LEVEL and cannot be hidden by pinn (pinn.runtime.quiet_tensorflow says so)
ABSL_ONCE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
             "Compiled cluster using XLA!  This line is logged at most once for the lifetime of the process.")
#: TensorFlow 2.16+ writes its oneDNN start-up line through absl before absl::InitializeLog(), in absl's format
#: ("I0000 00:00:1795777968.278240   19979 port.cc:153] oneDNN custom operations are on. ..."), and that ignores
#: TF_CPP_MIN_LOG_LEVEL too (TensorFlow 2.15 wrote it through its own logging, which the variable hides)
ABSL_ONEDNN = re.compile(r"^I0000 00:00:[\d.]+ +\d+ port\.cc:\d+\] oneDNN custom operations are on")


def tensorflow_chatter(text):
    """TensorFlow's C++ log lines in ``text`` (empty when it kept quiet), less the two of ABSL_ONCE."""
    return [line for line in text.splitlines()
            if (TF_CPP_LOG_LINE.match(line) or any(s in line for s in TF_STARTUP))
            and not any(line.endswith(s) for s in ABSL_ONCE) and not ABSL_ONEDNN.match(line)]


def user_env(**changes):
    """The environment of a user who has not set TF_CPP_MIN_LOG_LEVEL (conftest sets it for the tests)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(changes)
    return env

"""Files a run leaves on disk, written so that a crash never tears them.

- :mod:`pinn.files.durable`: atomic replacement (temporary file, fsync, rename), appended
  lines, a folder replaced as a whole, and the message of a full disk;
- :mod:`pinn.files.checkpoint_dir`: the checkpoints of a directory and TensorFlow's
  ``checkpoint`` state file, read and written without TensorFlow.
- :mod:`pinn.files.lock`: one writer per model directory (a lock file, taken over when its
  holder is gone);
- :mod:`pinn.files.committee_dir`: a committee's directory and its ``member-K`` model directories.
"""

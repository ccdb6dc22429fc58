"""What the tests (tests/) and bench's own tests share, so that neither imports the other.

- :mod:`testbed.pipeline_project`: a throw-away copy of the pipeline to run end to end in (the
  end-to-end tests and the end-to-end benchmark, ``bench.perf.e2e``);
- :mod:`testbed.markdown`: a rendered Markdown table read back by cell (RESULTS.md's checks);
- :mod:`testbed.ssh_git`: a real SSH server (asyncssh) that serves git's pack commands, standing in for the
  multi-host services' sshd (tests/test_git_over_ssh.py).

Both import it from the repository root, where ``python -m pytest`` and ``python -m bench...`` put it
on the import path.
"""

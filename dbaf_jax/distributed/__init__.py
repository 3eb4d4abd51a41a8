"""The folder runs of ``anonymize`` and ``recover`` on a Ray cluster (``--ray``).

The same run as on one machine, spread by Ray Data: photos are the unit of work and a
clip is one task. The driver (the command's process) plans the run, draws the key
record and derives its seed once, checks that every node sees the paths, and alone
appends the face ledger and puts each output in place; the workers decode, detect,
run the model and write.

- `options`: the ``--ray [ADDRESS]`` and ``--ray-actors N`` arguments the two commands take.
- `cluster`: joining the cluster, what each stage asks of it (`Layout`), and the check
  that every node sees the run's paths.
- `staging`: the run's staging folder inside the output folder, from which the driver
  moves each output into place once its ledger entries are written.
- `workers`: what runs on the workers: detection tasks, the model actors, clip tasks.
- `runs`: the driver's side of an anonymize or recover run.

Ray is optional (``pip install 'dbaf-jax[distributed]'``); nothing here imports it
until a run asks for it. docs/distributed.md is the guide.
"""

LAYER = "interfaces"

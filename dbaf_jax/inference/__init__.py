"""Inference: anonymize and recover with a model directory, on arrays and on folders.

- `programs`: the jitted anonymize and recover programs and batch padding (arrays only).
- `anonymizer`: `FaceAnonymizer`, a loaded model on the devices (the array-level API,
  and whole photos through `faces.photos.PhotoFaces`).
- `planning`: which inputs go to which outputs, checked before any work.
- `report`: what a folder run did and its exit status.
- `settings`: what a user sets for a run (`FolderRunSettings`, `FaceFinding`), one object.
- `run`: one run (`Run`: the model, face finder, password, key record, face ledger and
  settings), built by `Run.start` with the model `Model.load` loads once.
- `aligned_folders`, `photo_folders`: the folder runs the commands call, each taking a
  `Run` with its source and target (`photo_pipeline`: what both photo runs share).

Evaluation and the benchmarks use `programs` and `anonymizer` only.
"""

LAYER = "inference"

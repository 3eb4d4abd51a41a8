"""Files on disk, above the networks: atomic writes (`atomic_files`), file kinds by
name and bytes (`file_kinds`), photo reading and writing (`images`), passwords and key
files (`keys`), input and output folders (`input_folder`, `output_folder`), and model
directories with the network kinds and method families they hold (`model_directory`,
`network_kinds`, `model_families`)."""

LAYER = "storage"

"""The one training loop of every stage and what it runs on and writes: the DeepSpeed engines and their config,
checkpoints and the resume check, faults (non-finite values, stops, full disks), metrics, run records, the output
folder and the memory plan's arithmetic. Imports ``dschat.core`` and ``dschat.data``."""

"""The engines a user would pick instead of TileInfer, measured with the comparison's metric and rows:
transformers (eager, and static cache + torch.compile) and the public DFlash reference (`spec.py`);
TileInfer's speedup over each from the same run (`speedup.py`)."""

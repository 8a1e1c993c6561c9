"""Will it fit: the peak GPU memory of a configuration, predicted before it runs.

predict.py turns a RunSpec into a prediction (a traced step plus analysis/peak_model.py),
validate.py holds predictions against the peaks measured in saved result.json files, and
command.py is `llmbench plan`: each strategy's predicted peak on a given GPU, and the largest
batch that fits.
"""

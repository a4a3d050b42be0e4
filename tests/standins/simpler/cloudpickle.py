"""Stand-in for cloudpickle (see _standin.py)."""

import pickle

dumps = pickle.dumps
loads = pickle.loads

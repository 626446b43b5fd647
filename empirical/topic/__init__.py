"""Topic structure in PyTorch (docs/papers/topic.md): the documents of §1, BERT-style masking, the
one-layer transformer of §2 and the observables of §6. Modules, read in this order:

* :mod:`.data` — vocabulary layouts, documents (tau-topic model, LDA), masking;
* :mod:`.model` — :class:`TopicTransformer`, the loss on selected positions, attention statistics;
* :mod:`.update` — the update rule (SGD or Adam, optax-style ``init``/``update`` with ``xp=``);
* :mod:`.experiment` — :class:`TopicExperiment`, :func:`train`, :func:`run` (the row's ``train`` slot);
* :mod:`.seeds` — :func:`train_seeds`: every seed of a config in one vectorised run (the claims'
  ``runs``; equal to :func:`train` per seed);
* :mod:`.text` — the real-text protocol (WikiText-2 LDA topics and same/different-topic ratios;
  the row's ``text`` slot), imported on its own (``empirical.topic.text``).

Float64 by default (the comparison with the float64 ODE is the point).
"""

from .data import DocumentSampler, Vocabulary, mask_batch, vocabulary
from .experiment import VARIANTS, TopicExperiment, run, train
from .model import TopicTransformer, attention_statistics, loss_on_selected
from .seeds import train_seeds

__all__ = ["Vocabulary", "vocabulary", "DocumentSampler", "mask_batch", "TopicTransformer", "loss_on_selected",
           "attention_statistics", "TopicExperiment", "train", "run", "train_seeds", "VARIANTS"]

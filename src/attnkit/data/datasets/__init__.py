"""The datasets attnkit builds by name: the verse-aligned Bible corpus (:mod:`.bible`, from the SWORD
modules) and the Fashion-MNIST scenes with their captions and boxes (:mod:`.scenes`). The generic
data code they use (any parallel corpus, tokenizers, vocabularies, batching) sits one level up, in
:mod:`attnkit.data`."""

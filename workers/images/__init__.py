"""Worker images: the built state of one commit for one build recipe, made once per node and reused.

key.py names an image (repository, recipe inputs' tree, recipe, base environment); cache.py keeps images under
the cache root with their manifests, locks and the LRU size cap; builder.py makes or reuses one (a copy of the venv
uv made for this interpreter, seeded from the base environment, the commit's tree exported, the build command run
with a shared compiler cache).
"""

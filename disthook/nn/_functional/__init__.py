"""The families of ``disthook.nn.functional`` beyond its core, one module each; every public
function here is re-exported by ``disthook.nn.functional``, where users find it."""

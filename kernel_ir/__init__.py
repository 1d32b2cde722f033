"""The kernel IR: what a checked TL program asks the GPU to compute, between the checked model and the
emitters. Pure data and passes over it; it imports no TL syntax, no backend and no torch, so the translator
(which builds and renders it) and the runner (which evaluates it as the reference) both may import it."""

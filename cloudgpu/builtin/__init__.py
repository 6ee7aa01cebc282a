"""Built-in providers that need no cloud account: `local` (this machine) and `ssh`
(machines the user owns). They register through the same entry-point group as every
other provider."""

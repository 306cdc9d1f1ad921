"""Differential tests: flowcast's flow runtime against Ioflo 2.0.3 on a corpus of FloScripts."""

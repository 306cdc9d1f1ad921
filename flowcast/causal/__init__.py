"""flowcast.causal"""

"""flowcast.cast"""

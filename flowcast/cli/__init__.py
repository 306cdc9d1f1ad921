"""flowcast.cli"""

"""flowcast.store"""

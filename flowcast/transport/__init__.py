"""flowcast.transport"""

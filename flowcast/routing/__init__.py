"""flowcast.routing"""

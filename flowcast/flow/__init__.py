"""flowcast.flow"""

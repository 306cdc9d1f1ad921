"""flowcast.behaving"""
